require "fileinto";
if exists "list-id" { fileinto "List"; }
if exists ["message-id", "date"] { fileinto "Both"; }
if not exists "subject" { fileinto "NoSubject"; }
