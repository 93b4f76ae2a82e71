if header :contains "subject" "meeting" { redirect "boss@example.net"; }
redirect "boss@example.net";
