require ["relational", "comparator-i;ascii-numeric", "fileinto"];
if header :is :comparator "i;ascii-numeric" "x-spam-score" "03" { fileinto "LeadingZero"; }
if header :value "gt" :comparator "i;ascii-numeric" "x-spam-score" "100" { fileinto "Infinity"; }
