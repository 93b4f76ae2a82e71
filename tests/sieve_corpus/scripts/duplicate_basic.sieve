require ["duplicate", "fileinto"];
if duplicate { fileinto "Dup"; }
if duplicate :header "x-label" :handle "labels" { fileinto "DupLabel"; }
if duplicate :uniqueid "fixed" :seconds 60 { fileinto "DupFixed"; }
