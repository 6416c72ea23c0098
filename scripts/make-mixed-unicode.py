#!/usr/bin/env python3
# Writes testdata/text/mixed-unicode.md: text as it arrives from web pages, chat apps, PDFs and
# editors, with the invisible characters and odd spaces they carry (written out as escapes
# here so the source shows them).
SHY, ZWSP, ZWJ, ZWNJ, NBSP, NNBSP, THIN, EM, IDEO, WJ, BOM = '\u00ad', '\u200b', '\u200d', '\u200c', '\u00a0', '\u202f', '\u2009', '\u2003', '\u3000', '\u2060', '\ufeff'
VS16, LRM, RLM, RLO, PDF = '\ufe0f', '\u200e', '\u200f', '\u202e', '\u202c'
paras = [
 f"# Field notes{NBSP}{NBSP}— week{NBSP}12\n",
 f"The coun{SHY}cil ap{SHY}proved the bud{SHY}get of 4{NNBSP}200{NBSP}000{NBSP}€ on Mon{SHY}day,{NBSP}{NBSP}after a long de{SHY}bate about in{SHY}fra{SHY}struc{SHY}ture.\n",
 f"Copied from a PDF:{EM}the{THIN}results{THIN}were{NBSP}{NBSP}{NBSP}inconclusive ,{NBSP}and the{ZWSP}re{ZWSP}view{ZWSP}ers asked for more data.\n",
 f"{BOM}Meeting at 10{NNBSP}am{NBSP}— room{NBSP}B{NBSP}204.{WJ} Bring the re{SHY}port.\n",
 f"Great news \U0001F389{VS16} the team shipped it! \u2764{VS16} \U0001F44D\U0001F3FD \U0001F469{ZWJ}\U0001F4BB \U0001F468{ZWJ}\U0001F469{ZWJ}\U0001F467 \u2764{VS16}{ZWJ}\U0001F525\n",
 f"Status: \u2705{VS16} done, \u26A0{VS16} blocked, \u2601{VS16} cloud, \u260E{VS16} call me\n",
 f"東京の会議は{IDEO}午後３時から{IDEO}{IDEO}始まります。資料は{ZWSP}共有フォルダに{ZWSP}あります。\n",
 f"北京{IDEO}上海{IDEO}广州：三个城市的{NBSP}数据{NBSP}已经更新。\n",
 f"서울의{NBSP}날씨는{IDEO}맑음.{ZWSP} 내일은{NBSP}{NBSP}비가 옵니다.\n",
 f"Tiếng Việt: Ha\u0300 Nô\u0323i la\u0300 thu\u0309 đô cu\u0309a Viê\u0323t Nam.\n",
 f"Café, naïve, coöperate, résumé (precomposed) and Cafe\u0301, nai\u0308ve (decomposed).\n",
 f"Persian: می{ZWNJ}خواهم به خانه بروم.{RLM} Arabic: مرحبا{ZWNJ} بالعالم {LRM}(hello){LRM}\n",
 f"हिन्दी: क्{ZWJ}ष और द्{ZWNJ}व — नमस्ते{ZWSP} दुनिया।\n",
 f"Hidden: pay{RLO}lanigiro{PDF} now{ZWSP}{ZWSP}{ZWSP} please{WJ}.\n",
 "\n\n\n",
 f"Indented list:\n  - first{NBSP}item\n    - nested\t\titem   \n{NBSP}{NBSP}- odd indent\n",
 "```python\ndef  f(x):\n\treturn  x\u00a0+\u200b1   # keep me\n```\n",
 f"Inline `a{NBSP}{NBSP}b` code and `x{ZWSP}y` spans stay in prose mode;{NBSP}{NBSP}text around them does not.\n",
 f"Tabs\tbetween\t\twords and  double  spaces  everywhere.   \r\n",
 f"Windows line\r\nendings\r\nhere.\r\n",
 f"Numbers: 1{THIN}000{THIN}000, 3{NBSP}%, 25{NNBSP}°C, § 4{NBSP}(b).\n",
 f"E-mail sig: —{NBSP}{NBSP}Sent from my phone{ZWSP}{ZWSP}\n",
]
text = "".join(p if p.endswith("\n\n\n") else p + "\n" for p in paras)
import os
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'testdata', 'text', 'mixed-unicode.md'), 'w', encoding='utf-8', newline='').write(text * 8)
print(len(text*8), "chars")
