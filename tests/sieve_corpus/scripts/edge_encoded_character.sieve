require ["encoded-character", "fileinto"];
if header :contains "subject" "${hex:4D 65}eting" { fileinto "Hex"; }
fileinto "${unicode:00e9}t${hex:c3 a9}";
