require "fileinto";
fileinto "x"
