redirect "a@example.net"; redirect "b@example.net"; redirect "c@example.net";
redirect "d@example.net"; redirect "e@example.net";
