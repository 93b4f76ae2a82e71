require "fileinto";
if header :contains "subject" "" { fileinto "AnySubject"; }
if header :matches "x-missing" "*" { fileinto "Never"; }
if header :is "x-missing" "" { fileinto "NeverEmpty"; }
if address :all :contains "from" "" { fileinto "AnyFrom"; }
