require ["fileinto"];
if header :comparator "i;octet" :matches "subject" "*[DEV]*" { fileinto "UpperDev"; }
if header :comparator "i;octet" :matches "subject" "*[dev]*" { fileinto "LowerDev"; }
if header :comparator "i;octet" :contains "x-spam-flag" "yes" { fileinto "LowerYes"; }
