require ["relational", "fileinto"];
if header :count "gt" "received" "2" { fileinto "MoreThanTwoCasemap"; }
if address :count "eq" "to" "3" { fileinto "ThreeTo"; }
if header :count "ge" "x-label" "10" { fileinto "CasemapTen"; }
