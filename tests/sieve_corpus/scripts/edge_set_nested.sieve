require ["variables", "fileinto"];
set "a" "b";
set "b" "c";
set "ab" "${a}${b}";
set "x" "${${a}}";
fileinto "N/${ab}/${x}";
set :length "n" "${ab}${ab}";
if string :value "eq" :comparator "i;octet" "${n}" "4" { fileinto "LenFour"; }
