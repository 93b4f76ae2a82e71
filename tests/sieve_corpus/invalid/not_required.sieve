keep;

fileinto "Archive";
