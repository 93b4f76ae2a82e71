require ["imap4flags", "fileinto", "variables", "relational", "comparator-i;ascii-numeric"];
setflag "a b";
addflag "c";
if hasflag :contains "b" { fileinto "HasB"; }
if hasflag :is "d" { fileinto "HasD"; }
if hasflag :count "eq" :comparator "i;ascii-numeric" "3" { fileinto "Three"; }
set "myvar" "";
addflag "myvar" "x y";
if hasflag "myvar" "y" { fileinto "VarY"; }
fileinto :flags "explicit \\Answered" "Explicit";
