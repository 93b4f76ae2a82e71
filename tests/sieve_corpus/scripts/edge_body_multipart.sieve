require ["body", "fileinto"];
if body :content "multipart" :contains "preamble" { fileinto "Preamble"; }
if body :content "text/plain" :matches "*invoice*" { fileinto "PlainMatch"; }
if body :content ["image", "audio"] :contains "" { fileinto "Media"; }
if body :text :count "ge" "1" { fileinto "Never"; }
