require ["imap4flags", "fileinto"];
addflag "one";
fileinto "A";
removeflag "one";
addflag "two";
fileinto "B";
setflag "";
