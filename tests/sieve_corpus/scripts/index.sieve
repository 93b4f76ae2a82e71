require ["date", "index", "fileinto", "variables"];
if header :index 2 "x-label" "two" { fileinto "Second"; }
if header :index 1 :last "x-label" "three" { fileinto "LastIsThree"; }
if header :index 4 "x-label" "three" { fileinto "NoFourth"; }
if date :index 1 :last :zone "+0000" "received" "year" "2021" { fileinto "LastReceived2021"; }
if date :index 1 :zone "+0000" "received" "date" "2021-01-01" { fileinto "FirstReceivedUTC"; }
if address :index 2 "to" "other@example.org" { fileinto "SecondTo"; }
