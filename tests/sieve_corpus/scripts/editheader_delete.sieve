require ["editheader", "fileinto", "index", "relational", "comparator-i;ascii-numeric"];
deleteheader "x-spam-score";
deleteheader :index 1 "x-label";
deleteheader :matches "x-label" "th*";
if not exists "x-spam-score" { fileinto "Deleted"; }
if header :count "eq" :comparator "i;ascii-numeric" "x-label" "1" { fileinto "OneLabelLeft"; }
