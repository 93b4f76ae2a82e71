require ["editheader", "index", "fileinto", "variables"];
deleteheader :index 1 :last "received";
deleteheader :index 1 :last "x-label";
if header :matches "x-label" "*" { fileinto "L/${1}"; }
deleteheader :contains "x-label" "w";
if header :index 1 :last "x-label" "one" { fileinto "OnlyOne"; }
