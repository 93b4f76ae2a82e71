require "fileinto";
if header :is "x-spam-score" "3" { fileinto "Three"; }
elsif header :contains "subject" ["sale", "release"] { fileinto "Promo"; }
elsif exists "bcc" { fileinto "Bcc"; }
else { fileinto "Other"; }
