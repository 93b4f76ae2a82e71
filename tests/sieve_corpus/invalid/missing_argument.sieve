require "fileinto";
fileinto;
