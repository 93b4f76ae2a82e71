require ["vacation"];
vacation :mime :subject "MIME away" text:
Content-Type: text/plain; charset=utf-8

Ich bin nicht da.
.
;
