keep;
frobnicate "x";
