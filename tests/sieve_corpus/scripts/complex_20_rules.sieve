require ["fileinto", "imap4flags", "variables", "envelope", "subaddress", "relational", "comparator-i;ascii-numeric", "body"];
if exists "list-id" { if header :matches "list-id" "*<*>*" { fileinto "Lists/${2}"; stop; } }
if header :contains "x-spam-flag" "yes" { fileinto "Junk"; stop; }
if header :value "ge" :comparator "i;ascii-numeric" "x-spam-score" "10" { fileinto "Junk"; stop; }
if address :domain "from" "shop.example.org" { fileinto "Shopping"; stop; }
if address :is "from" "boss@example.com" { addflag "\\Flagged"; }
if header :contains "subject" "invoice" { fileinto "Finance"; }
if header :contains "subject" "meeting" { addflag "$Meeting"; }
if envelope :detail "to" "shop" { fileinto "Shop"; }
if header :contains "from" "mailer-daemon" { fileinto "Bounces"; stop; }
if body :contains "unsubscribe" { fileinto "Newsletters"; }
if header :is "x-priority" "1" { addflag "$Urgent"; }
if allof (exists "cc", address :count "ge" :comparator "i;ascii-numeric" "cc" "2") { addflag "$Group"; }
if header :matches "subject" "Re: *" { fileinto "Replies"; }
if address :localpart "to" "postmaster" { fileinto "Admin"; }
if header :contains "subject" ["urgent", "asap"] { addflag "\\Flagged"; }
if not exists "message-id" { addflag "$NoMsgId"; }
if size :over 100K { fileinto "Large"; }
if header :contains "received" "example.org" { addflag "$ViaOrg"; }
if address :domain "to" "example.net" { fileinto "Net"; }
if header :matches "date" "*2019*" { fileinto "Old"; }
