require ["imap4flags", "fileinto"];
addflag ["$Label1", "\\Seen", "Work"];
if hasflag :matches "$label*" { fileinto "LabelMatch"; }
if hasflag :comparator "i;octet" :is "work" { fileinto "OctetWork"; }
if hasflag :is "\\SEEN" { fileinto "SeenCase"; }
