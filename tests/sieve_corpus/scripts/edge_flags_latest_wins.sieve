require ["imap4flags", "fileinto"];
addflag "late";
fileinto :flags "x" "Box";
fileinto "Box";
fileinto :flags "y" "C";
fileinto :flags "z" "C";
keep :flags "k"; keep;
