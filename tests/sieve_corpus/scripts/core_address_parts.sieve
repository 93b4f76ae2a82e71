require "fileinto";
if address :is :all "from" "sender@example.org" { fileinto "AllFrom"; }
if address :is :localpart "from" "dave" { fileinto "Local"; }
if address :is :domain "from" "EXAMPLE.ORG" { fileinto "Domain"; }
if address :contains "cc" "bob" { fileinto "CcBob"; }
if address :matches :domain ["to", "cc"] "*.net" { fileinto "NetDomain"; }
if address :is "to" "undisclosed-recipients" { fileinto "Group"; }
