require "fileinto";
fileinto "back\\slash";
fileinto "q\"uote";
fileinto "a\b";
