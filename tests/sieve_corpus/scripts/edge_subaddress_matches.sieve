require ["envelope", "subaddress", "fileinto", "variables"];
if envelope :detail :matches "to" "*" { fileinto "D/${1}"; }
if envelope :user :matches "to" "u*r" { fileinto "UserGlob"; }
if address :detail :is "to" "shop" { fileinto "HeaderDetail"; }
