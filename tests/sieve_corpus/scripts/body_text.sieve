require ["body", "fileinto"];
if body :contains "agenda" { fileinto "Agenda"; }
if body :text :contains "invoice total" { fileinto "Invoice"; }
if body :contains "secret-word" { fileinto "HtmlWord"; }
if body :raw :contains "=E2=82=AC" { fileinto "RawQP"; }
if body :text :contains "café" { fileinto "Cafe"; }
