require ["imap4flags"];
if header :contains "subject" "sale" { addflag "Junk"; }
addflag "$Label1 $Label2";
removeflag "$label2";
