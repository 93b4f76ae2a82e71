require "fileinto";
fileinto :nope "a";
