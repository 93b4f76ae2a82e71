require ["body", "fileinto"];
if body :content "application/pdf" :contains "PDF-1.4" { fileinto "Pdf"; }
if body :content "text/html" :contains "<b>World</b>" { fileinto "Html"; }
if body :content "text" :contains "invoice" { fileinto "TextType"; }
