require ["fileinto", "x-unknown"];
keep;
