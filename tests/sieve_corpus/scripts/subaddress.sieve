require ["envelope", "subaddress", "fileinto", "variables"];
if envelope :detail "to" "lists" { fileinto "Lists"; }
elsif envelope :matches :detail "to" "*" { fileinto "Detail-${1}"; }
if envelope :user "to" "user" { fileinto "UserPart"; }
if address :detail "to" "" { fileinto "EmptyDetailNever"; }
if address :user :is "to" "user" { fileinto "HeaderUser"; }
