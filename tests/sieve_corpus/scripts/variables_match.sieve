require ["variables", "fileinto"];
if header :matches "subject" "* *" { fileinto "M/${1}/${2}"; }
if address :matches "from" "*@*" { fileinto "U/${1}/${2}/${0}"; }
if header :matches "date" "*, * * * *" { fileinto "D/${2}-${3}-${4}"; }
if header :matches "subject" "???*" { fileinto "Q/${1}${2}${3}"; }
