require ["duplicate", "fileinto"];
if duplicate :last { fileinto "Dup"; }
if not duplicate :header "message-id" :handle "x" { fileinto "First"; }
