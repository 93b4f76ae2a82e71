require ["imap4flags", "fileinto"];
keep :flags ["\\Seen", "$Kept"];
addflag "late";
fileinto "Box";
fileinto :flags "x" "Box";
