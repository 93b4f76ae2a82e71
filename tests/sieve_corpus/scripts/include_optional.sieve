require ["include", "fileinto"];
include :personal :optional "does-not-exist";
fileinto "AfterInclude";
