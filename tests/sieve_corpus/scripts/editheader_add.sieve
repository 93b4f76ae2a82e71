require ["editheader", "fileinto", "index"];
addheader "X-Sieved" "yes";
addheader :last "X-Sieved-Last" "also";
if header :is "x-sieved" "yes" { fileinto "SawAdded"; }
if header :index 1 :last "x-sieved-last" "also" { fileinto "SawLast"; }
