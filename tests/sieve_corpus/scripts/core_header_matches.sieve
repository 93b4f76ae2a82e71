require "fileinto";
if header :matches "subject" "*tomorrow*" { fileinto "Tomorrow"; }
if header :matches "subject" "[dev]*" { fileinto "Bracket"; }
if header :matches "subject" "?EW year" { fileinto "Question"; }
if header :matches "subject" "SALE\\*" { fileinto "Never"; }
if header :matches "subject" "*50\\%*" { fileinto "Escaped"; }
if header :matches "x-spam-score" "" { fileinto "EmptyNever"; }
