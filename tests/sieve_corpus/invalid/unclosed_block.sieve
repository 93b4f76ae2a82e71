if true {
  keep;
