require ["relational", "comparator-i;ascii-numeric", "fileinto"];
if address :count "ge" :comparator "i;ascii-numeric" ["to", "cc"] "3" { fileinto "ManyRecipients"; }
if header :count "eq" :comparator "i;ascii-numeric" "x-label" "3" { fileinto "ThreeLabels"; }
if header :count "eq" :comparator "i;ascii-numeric" "received" "0" { fileinto "NoReceived"; }
