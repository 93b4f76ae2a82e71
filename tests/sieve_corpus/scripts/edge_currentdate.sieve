require ["date", "relational", "fileinto"];
if currentdate :value "ge" "year" "2000" { fileinto "AfterY2K"; }
if currentdate :zone "+0000" :value "lt" "date" "1999-01-01" { fileinto "Never"; }
if currentdate :count "eq" "zone" "1" { fileinto "OneZone"; }
