require ["reject", "fileinto"];
fileinto "Kept";
reject "conflicts with fileinto";
