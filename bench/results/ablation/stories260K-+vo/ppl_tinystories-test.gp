set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/stories260K-+vo/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'stories260K'
plot 4.1208321378379855 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 5.568611161258435
20 9.842742969771672
30 19.001804129912315
40 33.1115299334267
e
