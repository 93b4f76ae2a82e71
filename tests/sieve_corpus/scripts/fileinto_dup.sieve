require ["fileinto"];
fileinto "A"; fileinto "A"; keep; fileinto "INBOX";
