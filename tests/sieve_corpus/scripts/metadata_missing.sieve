require ["mboxmetadata", "servermetadata", "fileinto"];
if metadataexists "INBOX" "/private/comment" { fileinto "HasComment"; }
if metadata :is "INBOX" "/private/comment" "x" { fileinto "CommentX"; }
if not servermetadataexists "/shared/comment" { fileinto "NoServerComment"; }
if servermetadata :contains "/shared/comment" "" { fileinto "ServerCommentAny"; }
