require ["variables", "fileinto", "relational"];
set "a" "hello";
set "b" "";
if string :count "eq" ["${a}", "${b}", "x"] "2" { fileinto "CountTwo"; }
if string :matches "${a}" "h*o" { fileinto "Matched"; }
if string :value "gt" "${a}" "abc" { fileinto "Greater"; }
set "c" "${a} ${a}";
fileinto "${c}";
