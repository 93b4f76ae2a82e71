require ["vacation"];
vacation :addresses ["user@example.com"] "Away.";
