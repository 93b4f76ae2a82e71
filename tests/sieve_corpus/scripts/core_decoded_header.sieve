require "fileinto";
if header :contains "subject" "für März" { fileinto "Decoded"; }
if address :is "from" "erin@example.org" { fileinto "Erin"; }
if header :contains "from" "Müller" { fileinto "Umlaut"; }
