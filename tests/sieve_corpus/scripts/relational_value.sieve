require ["relational", "comparator-i;ascii-numeric", "fileinto"];
if header :value "ge" :comparator "i;ascii-numeric" "x-spam-score" "5" { fileinto "Spam"; }
elsif header :value "lt" :comparator "i;ascii-numeric" "x-spam-score" "5" { fileinto "Ham"; }
if header :value "gt" "subject" "M" { fileinto "AfterM"; }
if header :value "eq" :comparator "i;ascii-numeric" "x-spam-score" "abc" { fileinto "NotNumberEqual"; }
