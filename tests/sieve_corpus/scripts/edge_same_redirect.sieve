redirect "a@example.net"; redirect "A@example.net"; redirect "a@example.net";
