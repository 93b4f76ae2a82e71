require "fileinto";
if header :is ["x-nothing", "subject", "from"] ["New year", "frank@example.org"] { fileinto "Either"; }
if header :contains ["to", "cc"] "carol" { fileinto "Carol"; }
if address :is :domain ["from", "sender", "reply-to"] "example.net" { fileinto "NetAny"; }
