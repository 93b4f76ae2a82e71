require ["imap4flags", "fileinto"];
setflag "\\Flagged";
addflag ["$Work", "\\Seen"];
fileinto "Flagged";
removeflag "\\seen";
keep;
