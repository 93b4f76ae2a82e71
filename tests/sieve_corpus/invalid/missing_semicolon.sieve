require "fileinto";
fileinto "a"
keep;
