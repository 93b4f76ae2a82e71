require ["variables", "fileinto"];
set "a" "x";
set "name" "a";
if header :matches "subject" "*" { set "whole" "${0}"; }
fileinto "V/${a}${a}/${}/${1x}/${whole}";
set "A" "upper";
fileinto "V2/${a}";
