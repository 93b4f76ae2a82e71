require ["copy", "fileinto"];
fileinto :copy "Copied";
redirect :copy "archive@example.net";
