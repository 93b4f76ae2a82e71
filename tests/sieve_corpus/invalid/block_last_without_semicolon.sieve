require "fileinto";
if true {
  fileinto "a";
  keep
}
