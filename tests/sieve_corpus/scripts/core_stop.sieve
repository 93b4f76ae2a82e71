require "fileinto";
fileinto "First";
if true { stop; }
fileinto "Never";
