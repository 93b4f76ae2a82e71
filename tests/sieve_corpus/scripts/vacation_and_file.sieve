require ["vacation", "fileinto", "mailbox"];
fileinto :create "Filed";
vacation :days 1 "Gone fishing.";
