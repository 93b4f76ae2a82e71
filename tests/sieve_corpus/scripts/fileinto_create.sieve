require ["fileinto", "mailbox"];
fileinto :create "Archive/2020";
